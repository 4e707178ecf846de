"""Every query the server makes lives in this package."""
