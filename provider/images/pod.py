"""The pod image: the python image (`images.python_image`: Debian, python3, NumPy) plus Debian's
openssh-server, set up to run as the one unprivileged user a pod is (`pod`, the provider's
container uid, home /workspace) on a read-only root.

Built in seconds by `debian_layer`, without network inside the container (this machine's apt
downloads the .deb files openssh-server needs beyond the python image, about 3 MB). The build
is cached by a content tag over its recipe (the python image's tag, the packages, the sshd
configuration, the start script, the uid and gid).

At start (`START_SCRIPT`, run as the pod's user) sshd gets a fresh ed25519 host key and the
renter's one public key (`UNCHAINED_SSH_KEY`) in a tmpfs at POD_RUN_DIR that only that user
can read, and runs in the foreground logging to stderr (the container's log): key only, no
password, no PAM, no root, on POD_SSH_PORT (unprivileged: no capability needed).
"""

from __future__ import annotations

import docker

from offchain.protocol.job.jobspec import DEFAULT_POD_IMAGE
from provider.images import recipes as images
from provider.images.debian_layer import commit_with_packages
from provider.sandbox.hardening import THREAD_VARIABLES

POD_REPOSITORY = DEFAULT_POD_IMAGE.split(":")[0]
POD_PACKAGES = ("openssh-server",)
POD_SSH_PORT = 2222
POD_USER = "pod"
POD_HOME = "/workspace"
POD_RUN_DIR = "/run/pod"  # tmpfs owned by the pod's user: host key, authorized_keys, pid
SSH_KEY_VARIABLE = "UNCHAINED_SSH_KEY"
SSHD_CONFIG_PATH = "/etc/ssh/unchained_sshd_config"
START_PATH = "/usr/local/sbin/unchained-pod"

SSHD_CONFIG = f"""\
# An unprivileged sshd for one user and one key (provider/images/pod.py)
Port {POD_SSH_PORT}
HostKey {POD_RUN_DIR}/ssh_host_ed25519_key
AuthorizedKeysFile {POD_RUN_DIR}/authorized_keys
PidFile {POD_RUN_DIR}/sshd.pid
Include {POD_RUN_DIR}/session.conf
AllowUsers {POD_USER}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
HostbasedAuthentication no
PermitEmptyPasswords no
PermitRootLogin no
UsePAM no
StrictModes yes
MaxAuthTries 3
LoginGraceTime 30
ClientAliveInterval 30
PrintMotd no
PrintLastLog no
X11Forwarding no
PermitTunnel no
GatewayPorts no
PermitListen none
Subsystem sftp /usr/lib/openssh/sftp-server
"""
# what a job's processes get from the provider, a pod's sessions get too (sshd starts each
# session with an environment of its own)
SESSION_ENV = " ".join(f"{name}=${name}" for name in THREAD_VARIABLES)
START_SCRIPT = f"""\
#!/bin/sh
# A pod's sshd (provider/images/pod.py): a host key of its own, the renter's key, key only.
set -e
umask 077
ssh-keygen -q -t ed25519 -N '' -C pod -f {POD_RUN_DIR}/ssh_host_ed25519_key
printf '%s\\n' "${SSH_KEY_VARIABLE}" > {POD_RUN_DIR}/authorized_keys
echo "SetEnv {SESSION_ENV}" > {POD_RUN_DIR}/session.conf
umask 022
exec /usr/sbin/sshd -D -e -f {SSHD_CONFIG_PATH}
"""
# As root in the build container, after dpkg: the pod user taking the uid and gid (whoever
# had them before gives them up), its home, sshd's host keys made by the package removed (each
# pod makes its own).
INSTALL = """\
rm -f /etc/ssh/ssh_host_*
sed -i "/^[^:]*:[^:]*:$POD_UID:/d; /^$POD_USER:/d" /etc/passwd
sed -i "/^[^:]*:[^:]*:$POD_GID:/d; /^$POD_USER:/d" /etc/group
echo "$POD_USER:x:$POD_UID:$POD_GID:pod:$POD_HOME:/bin/bash" >> /etc/passwd
echo "$POD_USER:x:$POD_GID:" >> /etc/group
mkdir -p "$POD_HOME" "$POD_RUN_DIR"
chown "$POD_UID:$POD_GID" "$POD_HOME"
"""


def pod_image(client: docker.DockerClient, uid: int = 65534, gid: int = 65534) -> str:
    """The pod image for a provider whose containers run as `uid:gid` (its `RunnerSettings`),
    built here once; also tagged DEFAULT_POD_IMAGE, the image a pod spec names by default."""
    base = images.python_image(client)
    recipe = [base, *POD_PACKAGES, SSHD_CONFIG, START_SCRIPT, INSTALL, f"{uid}:{gid}"]
    reference = f"{POD_REPOSITORY}:{images.content_tag(*(part.encode() for part in recipe))}"

    def build() -> None:
        environment = {"POD_UID": str(uid), "POD_GID": str(gid), "POD_USER": POD_USER,
                       "POD_HOME": POD_HOME, "POD_RUN_DIR": POD_RUN_DIR}  # fmt: skip
        files = {SSHD_CONFIG_PATH: (SSHD_CONFIG.encode(), 0o644),
                 START_PATH: (START_SCRIPT.encode(), 0o755)}  # fmt: skip
        changes = [f"EXPOSE {POD_SSH_PORT}", f'CMD ["{START_PATH}"]', f"WORKDIR {POD_HOME}"]
        commit_with_packages(client, base, POD_PACKAGES, reference, changes, INSTALL, files,
                             environment)  # fmt: skip

    images.cached(client, reference, build)
    client.images.get(reference).tag(*DEFAULT_POD_IMAGE.split(":"))
    return reference
