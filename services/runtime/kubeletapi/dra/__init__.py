"""The DRA node service, one package per released version."""
