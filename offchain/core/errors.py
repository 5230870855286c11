"""The one root of Unchained's own errors, as pycardano has `PyCardanoException`: a CLI turns
any of them into a message and the market's API into one 4xx answer, in one place each. It
imports nothing of ours, so every layer, the chain's included, can raise one."""


class UnchainedError(Exception):
    """Something Unchained refused or could not do; the message says what and what to do."""
