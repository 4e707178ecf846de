"""The web console: static pages served at /console that read everything through the API."""
