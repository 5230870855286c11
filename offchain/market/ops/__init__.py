"""What an operator watches: the market's Prometheus metrics, /health and /ready."""
