-- Resource actions of an openmed.ai OpenMedModel. Written without the string
-- and math libraries, like health.lua.
local actions = {}

local spec = obj.spec
if type(spec) ~= "table" then
  spec = {}
end
local status = obj.status
if type(status) ~= "table" then
  status = {}
end

local suspended = spec.suspend == true
actions["suspend"] = {["disabled"] = suspended}
actions["resume"] = {["disabled"] = not suspended}

-- rollback: to the newest retained version other than the desired one, as
-- the rollback action picks it.
local function retainedVersions()
  local versions = {}
  if type(status.history) == "table" then
    for _, entry in ipairs(status.history) do
      if type(entry) == "table" and type(entry.version) == "string" then
        table.insert(versions, entry.version)
      end
    end
  end
  if #versions == 0 then
    for _, view in ipairs({status.lastSuccessfulSpec, status.previousSuccessfulSpec}) do
      if type(view) == "table" and type(view.version) == "string" then
        table.insert(versions, view.version)
      end
    end
  end
  return versions
end
local hasPrevious = false
for _, version in ipairs(retainedVersions()) do
  if version ~= spec.version then
    hasPrevious = true
    break
  end
end
actions["rollback"] = {["disabled"] = not hasPrevious}

-- retry: only a failed desired spec is blocked until the spec changes or a
-- reset is requested; every other state recovers by itself.
local blocked = status.phase == "Failed" or status.phase == "RolledBack"
if type(status.conditions) == "table" then
  for _, c in ipairs(status.conditions) do
    if type(c) == "table" and c.type == "Stalled" and c.status == "True" then
      blocked = true
    end
  end
end
actions["retry"] = {["disabled"] = not blocked}

return actions
