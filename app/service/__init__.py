"""The HTTP API and the live web view."""
