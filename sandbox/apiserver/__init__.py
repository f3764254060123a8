"""An in-memory double of kube-apiserver: storage and semantics (pure-ish) plus a thin aiohttp layer."""
