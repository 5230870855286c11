"""The market's HTTP routes: thin, each calling a service module."""
