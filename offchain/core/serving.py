"""How long our HTTP servers keep an idle connection open.

A server that closes an idle connection just as a client sends on it leaves the client with
"server disconnected without sending a response", which httpx does not retry. httpx drops idle
connections after 5 s, as uvicorn does by default: the two timers race. Our servers keep them
longer, so the client always lets go first."""

KEEP_ALIVE_S = 30
