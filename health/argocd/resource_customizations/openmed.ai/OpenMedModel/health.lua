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

local function str(v)
  if type(v) == "string" and v ~= "" then
    return v
  end
  return nil
end

local metadata = obj.metadata
if type(metadata) ~= "table" then
  metadata = {}
end
local spec = obj.spec
if type(spec) ~= "table" then
  spec = {}
end
local status = obj.status

-- Deletion first: the operator releases the target Deployment behind its
-- finalizer, whatever the status says. deletionMessage replaces Argo CD's
-- default "blocked by finalizers" text (gitops-engine 3.6 and later).
if metadata.deletionTimestamp ~= nil then
  local message = "Pending deletion"
  local target = nil
  if type(status) == "table" then
    target = str(status.targetName)
  end
  if target == nil and type(spec.targetRef) == "table" then
    target = str(spec.targetRef.name)
  end
  if target ~= nil then
    message = "Pending deletion; releasing Deployment " .. target
    if type(status) == "table" and type(status.conditions) == "table" then
      for _, c in ipairs(status.conditions) do
        if type(c) == "table" and c.status == "True" and c.reason == "ReleaseFailed" and (c.type == "Reconciling" or c.type == "Stalled") then
          message = "Pending deletion; releasing Deployment " .. target .. " failed, retrying"
          break
        end
      end
    end
  end
  hs.deletionMessage = message
  return result("Progressing", message)
end

local generation = nil
if type(metadata.generation) == "number" then
  generation = metadata.generation
end

-- Suspended once the operator has seen the suspension (it writes phase
-- Suspended), also when the spec changed since.
if spec.suspend == true and type(status) == "table" and status.phase == "Suspended" then
  if generation ~= nil and status.observedGeneration == generation then
    return result("Suspended", "Reconciliation is suspended")
  end
  return result("Suspended", "Reconciliation is suspended; the latest spec is not applied")
end

local notObserved = "Waiting for the operator to observe the latest generation"
if type(status) ~= "table" or generation == nil then
  return result("Progressing", notObserved)
end
if type(status.observedGeneration) ~= "number" or status.observedGeneration ~= generation then
  return result("Progressing", notObserved)
end

-- A condition stamped with another generation means the status mixes two
-- passes: trust none of it yet.
local conditions = {}
local count = 0
if type(status.conditions) == "table" then
  for _, c in ipairs(status.conditions) do
    if type(c) == "table" then
      if c.observedGeneration ~= nil and c.observedGeneration ~= generation then
        return result("Progressing", notObserved)
      end
      if type(c.type) == "string" and conditions[c.type] == nil then
        conditions[c.type] = c
        count = count + 1
      end
    end
  end
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

-- The operator writes what is happening, with coordinates only, into the
-- Reconciling and Stalled messages; statuses without one get fixed text.
local function message(conditionType, fallback)
  local c = conditions[conditionType]
  if c ~= nil and str(c.message) ~= nil then
    return c.message
  end
  return fallback
end

local phase = status.phase
if type(phase) ~= "string" then
  phase = ""
end

local function failureMessage()
  if reason("Ready") == "InvalidSpec" or reason("Stalled") == "InvalidSpec" then
    return "Spec is invalid"
  end
  -- Nothing failed: someone asked for a retained version.
  if reason("Degraded") == "ManualRollback" then
    return "Held at a retained version by a manual rollback"
  end
  if phase == "RolledBack" or reason("Stalled") == "RolledBack" then
    return "Desired spec failed; a retained version is serving"
  end
  return "Desired spec failed; no retained version is serving"
end

local function progressMessage()
  if phase == "Pending" then
    return "Waiting for the target Deployment"
  end
  if phase == "RollingOut" then
    return "Rolling out the desired version"
  end
  if phase == "RolledBack" then
    return "Restoring a retained version"
  end
  return "Reconciliation in progress"
end

if isTrue("Stalled") then
  return result("Degraded", message("Stalled", failureMessage()))
end
-- The model's rollout waits for the paused target Deployment: Argo CD shows
-- the paused Deployment itself as Suspended.
if isTrue("Reconciling") and reason("Reconciling") == "TargetPaused" then
  return result("Suspended", message("Reconciling", "Waiting for the target Deployment to be resumed"))
end
-- A Deployment that brings up pods or lost some while serving the desired
-- version is Progressing here, as Argo CD judges the Deployment itself.
if isTrue("Reconciling") then
  return result("Progressing", message("Reconciling", progressMessage()))
end
-- Progressing=True stands in for Reconciling on statuses written by the
-- reference operator, which had no Reconciling condition.
if isTrue("Progressing") then
  return result("Progressing", progressMessage())
end
if isTrue("Ready") then
  if str(status.activeVersion) ~= nil then
    return result("Healthy", "Serving " .. status.activeVersion)
  end
  return result("Healthy", "Desired version is serving")
end

-- No deciding condition: the phase decides (statuses without the kstatus
-- pair). A phase this script does not know is reported, never guessed.
if phase == "Failed" or phase == "RolledBack" then
  return result("Degraded", failureMessage())
end
if phase == "Pending" or phase == "RollingOut" or phase == "Ready" or phase == "Suspended" then
  return result("Progressing", progressMessage())
end
if phase == "" and count == 0 then
  return result("Progressing", "Waiting for the operator to report status")
end
return result("Unknown", "Status is not recognized by this health check")
