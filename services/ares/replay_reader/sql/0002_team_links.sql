-- Teams (issue 26): who delegated to whom. `parent_id` is the agent that delegated an
-- agent's latest delegated task (AgentLifecycle.parent_id, from task.delegated);
-- `delegated_to` the agents it delegated tasks to, in dispatch order, each once
-- (AgentTally.delegated_to, from delegation.dispatched). GET /agents/{id}/tree walks both.
-- Both nullable: a projector of the previous release that leads the schema again during a
-- rolling upgrade writes rows without them (null: none known); a rebuild fills them.
ALTER TABLE agents ADD COLUMN parent_id text;
ALTER TABLE agents ADD COLUMN delegated_to text[] DEFAULT '{}';

-- Rows projected before this migration: their stored lifecycle has the parent already
-- (absent before teams: null). Their dispatches are not stored anywhere but the log, so
-- `delegated_to` starts empty for them and the tree finds their children by `parent_id`
-- (`ares projections rebuild` folds the dispatch order back from Kafka).
UPDATE agents SET parent_id = lifecycle->>'parent_id' WHERE lifecycle->>'parent_id' IS NOT NULL;

-- A member's children by parent (the tree's recursive query).
CREATE INDEX agents_by_parent ON agents (parent_id, agent_id);
