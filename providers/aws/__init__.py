"""The AWS provider (``cloud: aws``): EKS worker nodes from the cheapest spot and on-demand EC2 offerings.

Registered as ``aws = "providers.aws:AwsProvider"`` in the ``tidal.providers`` entry-point group. Needs the
``aws`` extra (boto3).
"""

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
    "provider_id",
]
