"""The limits GCS documents, in one place for the client and the embedded server (pure constants)."""

MAX_COMPOSE_SOURCES = 32            # source objects per compose request
MAX_LIST_PAGE = 1000                # items per objects.list page (maxResults is capped here)
XML_MIN_PART_SIZE = 5 * 2**20       # every part of an XML multipart upload but the last
XML_MAX_PARTS = 10_000              # parts per XML multipart upload
RESUMABLE_CHUNK_MULTIPLE = 256 * 1024   # chunks of a resumable upload but the last
