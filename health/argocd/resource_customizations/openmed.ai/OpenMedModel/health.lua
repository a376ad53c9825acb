-- Health of an openmed.ai OpenMedModel.
--
-- The OpenMedModel status follows kstatus: Ready, Reconciling and Stalled
-- (the last two present only when True), status.observedGeneration and a
-- per-condition observedGeneration. A rolled-back resource is Degraded, as an
-- aborted Argo Rollout is: the declared spec is not what is serving.
-- The operator's health model (Go, Lua and Flux CEL, proven equal on one
-- fixture corpus) is documented in the openmed-operator repository, health/.
--
-- Written without the string, math and os libraries so it runs unchanged as
-- a built-in check and from argocd-cm with the default (closed) libraries.

local hs = {}

local function result(status, message)
  hs.status = status
  hs.message = message
  return hs
end

-- Deletion first: the operator releases the target Deployment behind its
-- finalizer, whatever the status says.
if type(obj.metadata) == "table" and obj.metadata.deletionTimestamp ~= nil then
  return result("Progressing", "Pending deletion")
end

local notObserved = "Waiting for the operator to observe the latest generation"
local generation = nil
if type(obj.metadata) == "table" and type(obj.metadata.generation) == "number" then
  generation = obj.metadata.generation
end
local status = obj.status
if type(status) ~= "table" or generation == nil then
  return result("Progressing", notObserved)
end
if type(status.observedGeneration) ~= "number" or status.observedGeneration ~= generation then
  return result("Progressing", notObserved)
end

-- A condition stamped with another generation means the status mixes two
-- passes: trust none of it yet.
local conditions = {}
if type(status.conditions) == "table" then
  for _, c in ipairs(status.conditions) do
    if type(c) == "table" then
      if c.observedGeneration ~= nil and c.observedGeneration ~= generation then
        return result("Progressing", notObserved)
      end
      if type(c.type) == "string" and conditions[c.type] == nil then
        conditions[c.type] = c
      end
    end
  end
end

if type(obj.spec) == "table" and obj.spec.suspend == true then
  return result("Suspended", "Reconciliation is suspended")
end

local function isTrue(conditionType)
  local c = conditions[conditionType]
  return c ~= nil and c.status == "True"
end

local function reason(conditionType)
  local c = conditions[conditionType]
  if c == nil then
    return nil
  end
  return c.reason
end

local phase = status.phase

local function failure()
  if reason("Ready") == "InvalidSpec" or reason("Stalled") == "InvalidSpec" then
    return result("Degraded", "Spec is invalid")
  end
  -- Nothing failed: someone asked for a retained version.
  if reason("Degraded") == "ManualRollback" then
    return result("Degraded", "Held at a retained version by a manual rollback")
  end
  if phase == "RolledBack" or reason("Stalled") == "RolledBack" then
    return result("Degraded", "Desired spec failed; a retained version is serving")
  end
  return result("Degraded", "Desired spec failed; no retained version is serving")
end

local function progressing()
  if phase == "Pending" then
    return result("Progressing", "Waiting for the target Deployment")
  end
  if phase == "RollingOut" then
    return result("Progressing", "Rolling out the desired version")
  end
  if phase == "RolledBack" then
    return result("Progressing", "Restoring a retained version")
  end
  return result("Progressing", "Reconciliation in progress")
end

if isTrue("Stalled") then
  return failure()
end
-- The model was serving and its Deployment lost availability for reasons
-- unrelated to a rollout: Flux keeps waiting, Argo CD shows the outage.
if isTrue("Degraded") and reason("Degraded") == "DeploymentUnavailable" then
  return result("Degraded", "Target Deployment lost availability")
end
-- Progressing=True stands in for Reconciling on statuses written by the
-- reference operator, which had no Reconciling condition.
if isTrue("Reconciling") or isTrue("Progressing") then
  return progressing()
end
if isTrue("Ready") then
  return result("Healthy", "Desired version is serving")
end

-- No deciding condition: the phase decides (statuses without the kstatus
-- pair). A phase this script does not know is reported, never guessed.
if phase == "Failed" or phase == "RolledBack" then
  return failure()
end
if phase == "Pending" or phase == "RollingOut" or phase == "Ready" or phase == "Suspended" then
  return progressing()
end
return result("Unknown", "Status is not recognized by this health check")
