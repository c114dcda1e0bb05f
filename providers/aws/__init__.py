"""The AWS provider (``cloud: aws``): EKS worker nodes from the cheapest spot and on-demand EC2 offerings.

Registered as ``aws = "providers.aws:AwsProvider"`` in the ``tidal.providers`` entry-point group. Needs the
``aws`` extra (boto3) to launch; ``offering_template`` (what an EKS node of an offering looks like) does not,
so importing this package loads boto3 only when a name that needs it is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoscaler.cloud import lazy_exports
from providers.aws.node_template import node_template as offering_template

if TYPE_CHECKING:
    from providers.aws.clients import ClientFactory, ClientOptions, Credentials
    from providers.aws.provider import AwsProvider, load_settings, provider_id
    from providers.aws.settings import AwsConfigError, AwsSettings

__all__ = [
    "AwsConfigError",
    "AwsProvider",
    "AwsSettings",
    "ClientFactory",
    "ClientOptions",
    "Credentials",
    "load_settings",
    "offering_template",
    "provider_id",
]

_LAZY = {
    "ClientFactory": "providers.aws.clients",
    "ClientOptions": "providers.aws.clients",
    "Credentials": "providers.aws.clients",
    "AwsProvider": "providers.aws.provider",
    "load_settings": "providers.aws.provider",
    "provider_id": "providers.aws.provider",
    "AwsConfigError": "providers.aws.settings",
    "AwsSettings": "providers.aws.settings",
}


__getattr__ = lazy_exports(__name__, _LAZY)
