"""Fleet-wide LLM token budgets per tenant.

``ares run budget-keeper`` folds ``ares.usage`` into per-tenant windows (tokens per UTC
minute, USD per UTC day) and publishes a ``BudgetState`` per tenant on the compacted
``ares.budgets``; ``ares budgets set`` writes limits to ``ares.budget-limits``; every
runtime manager follows ``ares.budgets`` (``KafkaBudgetView``) and asks it before each
provider call. See docs/budgets.md.
"""

from ares.budgets.model import BudgetLimits, BudgetState
from ares.budgets.windows import TenantWindows, UsageFold

__all__ = ["BudgetLimits", "BudgetState", "TenantWindows", "UsageFold"]
