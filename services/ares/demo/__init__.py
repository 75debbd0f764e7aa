"""`ares demo`: a fleet of agents, a worker killed mid-task, the fleet resurrected."""
