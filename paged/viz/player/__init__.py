"""The lesson player: every frame drawn once on the server, stepped in the browser (static files
beside this module)."""
