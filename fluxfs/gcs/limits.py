"""The limits GCS documents, in one place for the client and the embedded server (pure constants)."""

MAX_COMPOSE_SOURCES = 32            # source objects per compose request
MAX_LIST_PAGE = 1000                # items per objects.list page (maxResults is capped here)
XML_MIN_PART_SIZE = 5 * 2**20       # every part of an XML multipart upload but the last
XML_MAX_PARTS = 10_000              # parts per XML multipart upload
MAX_OBJECT_SIZE = 5 * 2**40         # 5 TiB: the largest object GCS stores
# Components of one composite object. GCS documented 1,024 ("compose operations that yield component
# counts exceeding 1024 are not allowed"); its current composite-objects page no longer states a maximum,
# but GCS-compatible servers and older deployments keep it. 1,024 is what the client stays under and
# what the embedded server enforces by default (its `max_components` setting), so a write that works
# here works on either.
MAX_COMPONENTS = 1024
RESUMABLE_CHUNK_MULTIPLE = 256 * 1024   # chunks of a resumable upload but the last
