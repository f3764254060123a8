"""The thin I/O shell to a Kubernetes API server: raw-JSON requests, watches and reflectors.

Built on the official client's ``kubernetes.aio`` for configuration and authentication; objects
travel as plain dicts so unknown fields round-trip unchanged. Nothing here opens a connection on
import: callers hand in a configured client.
"""
