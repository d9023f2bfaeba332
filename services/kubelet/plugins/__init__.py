"""The kubelet's side of the plugin boundary (upstream ``pkg/kubelet/pluginmanager`` and
``pkg/kubelet/cm/dra/plugin``): DRA drivers' plugins found through registration sockets and called
over gRPC.

* ``registry``: which plugin instance serves each driver (the newest registered, falling back to an
  older one while a rolling update runs); no I/O;
* ``client``: one plugin's ``DRAPlugin`` service, called with a deadline, errors as ``PluginError``;
* ``watcher``: the ``plugins_registry`` directory watched, the registration handshake
  (``GetInfo``, validation, ``NotifyRegistrationStatus``), deregistration when a socket goes.

See docs/kubelet-plugins.md.
"""
