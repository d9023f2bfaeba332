"""The client side every service uses (client-go's and controller-runtime's role).

* ``protocol``: the apiserver's request/reply wire protocol; ``client``: the async ``ApiClient``
  (requests, and ``watch`` over the log);
* ``tail``: following the log as it lands; ``store``: the log-fed object cache (``ApiStore``)
  the apiserver serves from and every controller reads;
* ``controller``: the controllers' runtime (``Runtime``: cache, level-triggered loop, writes);
  ``claimwrites``: carrying out claim actions through it;
* ``selectors``: label and field selectors; ``naming``: generated names (``generateName``).

Nothing here is imported by ``services/dra`` (pure rules); importing this package itself loads
nothing, so a pure module may use ``naming`` without pulling in NATS.
"""
