"""Sessions as Kubernetes pods: the pod's spec (`podspec`), its life through the official client
(`cluster`, `pods`), and the agent reached through `pods/attach` over a WebSocket of our own
(`attach`, `websocket`). The cluster's scheduler places them; see docs/scaling.md."""
