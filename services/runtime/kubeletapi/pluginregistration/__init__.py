"""Plugin registration (``pluginregistration.Registration``)."""
