"""The in-container agent: one persistent bash, driven over a framed socket protocol."""

PROTOCOL_VERSION = 2
AGENT_NAME = "sandshell-agent/2"
