"""The server's gRPC side, on the same port as its HTTP: the front protocol that tells the two apart (front.py),
the private in-process gRPC server (endpoint.py) and the Storage, StorageControl and Operations services a zonal
(Rapid) bucket needs (services.py and the modules it binds)."""
