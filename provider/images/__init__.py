"""Images the provider builds from Debian packages, and the engine's view of images (local list,
pull by digest).
"""
