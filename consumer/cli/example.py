"""The commented example specs `unchained job init` (`--example pytorch`: PYTORCH_SPEC) and
`unchained endpoint init` (`--example llm`: EXAMPLE_LLM_SPEC) write (each must load as its spec: a
JobSpec, a ServiceSpec, an LlmSpec)."""

EXAMPLE_SPEC = """\
# An Unchained job spec: what to run, on what, for how long and for at most how much.
# `unchained job submit job.yaml` asks the market for a quote and shows it before locking.
# Unknown fields are refused, so a typo never silently changes the job.

# The container image (docker reference): one the provider has (its offer lists them; the
# market quotes only a provider that has it). unchained/python-numpy is the demo provider's
# Python 3 with NumPy. The provider runs it as uid 65534, read-only root, no capabilities,
# and no network unless `network: true` below.
image: unchained/python-numpy:latest

# argv of the job (no shell is added). Write results under /out: they come back as a tar
# archive whose sha256 the provider signs in its receipt.
command: [python3, -c, "import pathlib; pathlib.Path('/out/hello.txt').write_text('hi')"]

# Environment variables (NVIDIA_* are the provider's).
env: {SEED: "7"}

# Files fetched and checked by the provider before the start, mounted read-only under /in.
# inputs:
#   - {path: data/train.csv, url: "https://example.org/train.csv", sha256: "<64 hex digits>"}

# The reserved bundle; the price is per second of all of it.
resources:
  gpus: 0              # how many GPUs (give gpu_model on the command line for an exact model)
  min_vram_mib: 0      # per GPU
  cpu_cores: 1
  memory_mib: 512
  disk_mib: 64         # size of /out

max_duration_s: 600              # killed after this; the escrow holds price x this
max_price_lovelace: 5000000      # the most the whole job may cost (5 ADA)
network: false
"""

PYTORCH_SPEC = """\
# A PyTorch training job: a small convolutional network on synthetic images (made in the
# script, seeded), on the GPU when the provider gives one (gpus: 1 and a CUDA image), else on
# the CPU. `unchained job submit job.yaml` asks the market for a quote and shows it first.
#
# unchained/pytorch-example is the project's image with Debian's PyTorch (CPU) and the script at
# /opt/unchained/torch/train_cnn.py; on a GPU provider name a CUDA build of PyTorch that has
# the script (docs/renter-guide.md).
image: unchained/pytorch-example:latest

# Every --checkpoint-every steps the script saves model, optimizer and step to
# /out/checkpoint.pt (atomically: a stop never leaves half of one); at the end /out/model.pt
# and /out/metrics.json. A job cancelled or stopped by its provider keeps its last
# checkpoint in its results, and `unchained job submit job.yaml --resume JOB` gives it to a
# new job (at /in/checkpoint.pt), which trains on from its step.
command: [python3, /opt/unchained/torch/train_cnn.py, --steps, "300", --checkpoint-every, "50"]

resources:
  gpus: 0
  cpu_cores: 1
  memory_mib: 512
  disk_mib: 64         # size of /out: checkpoints here are about 30 KB

max_duration_s: 300
max_price_lovelace: 5000000      # the most the whole job may cost (5 ADA)
network: false
"""

EXAMPLES = {"hello": EXAMPLE_SPEC, "pytorch": PYTORCH_SPEC}  # `job init --example NAME`

EXAMPLE_SERVICE_SPEC = """\
# An Unchained service spec: a server you rent by the request and/or by the second, reached
# through its provider's gateway. `unchained endpoint deploy svc.yaml` picks an offer with a
# gateway, checks the deploy with that gateway before any money moves, then pays from a
# payment channel to that provider (opened with --deposit if you have none).
kind: service

# The container image (docker reference): one the provider has (`unchained offers search`
# lists offers and their images). It runs as the provider's non-root user, read-only root,
# no capabilities, no network: it is only reached, through its one port.
image: unchained/sample-service:latest
# command: [python3, /srv/server.py]   # argv; the image's own command when left out
# env: {MODEL: small}

port: 8000              # the one port the server listens on
health_path: /health    # answers 2xx once the server is ready: billing starts there

# One container's reserved bundle (at most the offer's); `replicas` such containers.
resources:
  cpu_cores: 1
  memory_mib: 256
replicas: 1
# min_replicas: 0          # scale to zero when idle: no price per second while at zero,
# scale_down_after_s: 300  # after this long without a request; the next one waits a cold start

# What you pay, lovelace (1 ADA = 1,000,000): each at least the provider's own price. Name
# one or both; the gateway takes each request only with an IOU that covers it.
price_per_request: 10000
# price_per_second: 50
"""

EXAMPLE_LLM_SPEC = """\
# An Unchained llm endpoint: a server that speaks OpenAI's API (/v1/models, /v1/completions,
# /v1/chat/completions with streaming, /v1/embeddings), paid per token from a payment channel.
# `unchained endpoint deploy chat.yaml`, then `unchained endpoint proxy chat`: any OpenAI
# client at the base URL it prints, each answer paid by your own count of its tokens.
kind: llm

# The sample server (a small GPT-2-shaped model whose weights are made from a seed, built by
# `unchained demo --services`); on a GPU provider, vLLM's image (vllm/vllm-openai@sha256:...).
image: unchained/llm-service:latest
port: 8000
start_timeout_s: 120     # not healthy by then: stopped, and you owe nothing

resources:
  cpu_cores: 1
  memory_mib: 512
replicas: 1
# min_replicas: 0          # scale to zero when idle; the next request waits a cold start

# Lovelace a token, each at least the provider's own (its offer's token_prices).
price_per_input_token: 2
price_per_output_token: 8
"""
# `endpoint init --example NAME`
SERVICE_EXAMPLES = {"service": EXAMPLE_SERVICE_SPEC, "llm": EXAMPLE_LLM_SPEC}
