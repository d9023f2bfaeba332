"""The archiver: moves history older than the retention out of the stream, by itself (docs/history.md)."""
