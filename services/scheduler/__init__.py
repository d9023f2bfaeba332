"""The scheduler: the pure core (``framework/``), its plugins (``plugins/``), the service shell
(``service/``) and the sagas it runs (``sagas/``); the DRA rules it applies are ``draflow.services.dra``'s."""
