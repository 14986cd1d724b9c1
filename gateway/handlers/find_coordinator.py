"""FindCoordinator: forwarded as is; each broker address in the answer becomes a gateway one."""

from protocol.versions import DECODABLE

from ..services import Services
from ._addresses import address_rewriter
from .base import Handler

API_KEY = 10
VERSIONS = DECODABLE[API_KEY]


def handler(services: Services) -> Handler:
    return address_rewriter(API_KEY, services)
