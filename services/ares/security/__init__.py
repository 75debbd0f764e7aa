"""Kafka security of ares-mesh: one principal per service and the ACLs each one needs."""

from ares.security.acls import (
    FEATURES,
    SERVICES,
    Acl,
    AclPlan,
    Need,
    ServiceNeeds,
    default_principal,
    plan_acls,
)

__all__ = [
    "FEATURES",
    "SERVICES",
    "Acl",
    "AclPlan",
    "Need",
    "ServiceNeeds",
    "default_principal",
    "plan_acls",
]
