"""The base every layer may use: the error type, safe file writes, progress lines. Imports nothing of cuw."""
