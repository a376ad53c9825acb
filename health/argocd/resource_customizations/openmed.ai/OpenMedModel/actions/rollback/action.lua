-- Roll back to the newest retained version other than the desired one by
-- setting openmed.ai/rollback-to; the operator restores that retained spec
-- and holds it until the annotation is removed and the spec changes.
local spec = obj.spec
if type(spec) ~= "table" then
  spec = {}
end
local status = obj.status
if type(status) ~= "table" then
  status = {}
end

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

for _, version in ipairs(versions) do
  if version ~= spec.version then
    if type(obj.metadata.annotations) ~= "table" then
      obj.metadata.annotations = {}
    end
    obj.metadata.annotations["openmed.ai/rollback-to"] = version
    break
  end
end
return obj
