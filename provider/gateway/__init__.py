"""The provider's gateway: renters reach their endpoints and pods here, paying by IOU on every
request.
"""
