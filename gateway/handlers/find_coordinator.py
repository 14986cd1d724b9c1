"""FindCoordinator: forwarded as is; each broker address in the answer becomes a gateway one."""

from protocol.versions import DECODABLE

from ._addresses import address_rewriter

API_KEY = 10
VERSIONS = DECODABLE[API_KEY]
handle = address_rewriter(API_KEY)
