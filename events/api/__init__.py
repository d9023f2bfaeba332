"""Kubernetes API objects as msgspec Structs (decode real manifests strictly, encode them back).

Entry points: ``draflow.events.api.codec.decode_object`` / ``encode_object`` for one manifest dict,
``draflow.events.api.loader.load_manifests`` for files and multi-document text,
``draflow.events.api.registry`` for the served kinds and their names. Storage versions: ``resource_v1`` and
``core_v1``.
"""
