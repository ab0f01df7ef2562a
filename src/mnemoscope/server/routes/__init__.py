"""The API's routers, one concern each; :func:`mnemoscope.server.app.create_app` includes them."""

__all__: list[str] = []
