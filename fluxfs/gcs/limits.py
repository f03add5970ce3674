"""The limits GCS documents, in one place for the client and the embedded server (pure constants)."""

MAX_COMPOSE_SOURCES = 32            # source objects per compose request
MAX_LIST_PAGE = 1000                # items per objects.list page (maxResults is capped here)
XML_MIN_PART_SIZE = 5 * 2**20       # every part of an XML multipart upload but the last
XML_MAX_PARTS = 10_000              # parts per XML multipart upload
MAX_OBJECT_SIZE = 5 * 2**40         # 5 TiB: the largest object GCS stores
# Components of one composite object: GCS documents no maximum today (its composite-objects page states
# only 1 to 32 sources per compose; componentCount is a 32-bit integer). It once documented 1,024
# ("compose operations that yield component counts exceeding 1024 are not allowed"), and older deployments
# and some GCS-compatible servers keep that limit: the embedded server enforces none unless told to (its
# `max_components` setting emulates such a server), and the client stays under the `compose_max_components`
# option (fluxfs/options.py), which it lowers to what a server turns out to enforce (writes/compose_limit.py).
LEGACY_MAX_COMPONENTS = 1024
RESUMABLE_CHUNK_MULTIPLE = 256 * 1024   # chunks of a resumable upload but the last
