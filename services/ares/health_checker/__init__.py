"""The health checker: death verdicts from heartbeats, a closed resurrection feedback loop,
death-loop alerts with a probable cause (see docs/health.md)."""

from ares.health_checker.config import HealthConfig
from ares.health_checker.detector import HealthState
from ares.health_checker.fingerprint import DeathFacts, Fingerprint, fingerprint
from ares.health_checker.service import HealthChecker

__all__ = ["DeathFacts", "Fingerprint", "HealthChecker", "HealthConfig", "HealthState",
           "fingerprint"]
