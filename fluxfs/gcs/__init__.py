"""The shared base of fluxfs's accelerations: one way to talk to GCS.

HTTP with retries and error mapping, checksums, bodies kept as chunks, timestamps, URL and
path parsing, temporary-object names, the listing pager, and the bridge from sync callers
to the filesystem's event loop. Pure helpers here (`checksums`, `chunks`, `timestamps`)
are also what the embedded server may share; nothing here imports torch.
"""
