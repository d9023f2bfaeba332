"""Kubernetes API objects as msgspec Structs (decode real manifests strictly, encode them back).

Entry points: ``events.api.codec.decode_object`` / ``encode_object`` for one manifest dict,
``events.api.loader.load_manifests`` for files and multi-document text, ``events.api.registry``
for the served kinds and their names. Storage versions: ``resource_v1`` and ``core_v1``.
"""
