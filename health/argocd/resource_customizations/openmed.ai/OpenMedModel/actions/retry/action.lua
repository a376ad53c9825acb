-- Try the failed desired spec again without editing it: helm-controller's
-- reset convention, reconcile.fluxcd.io/resetAt equal to
-- reconcile.fluxcd.io/requestedAt. A manual rollback hold is released too,
-- since it would keep the desired spec from being tried.
local os = require("os")
local token = os.date("!%Y-%m-%dT%H:%M:%SZ")
if type(obj.metadata.annotations) ~= "table" then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["reconcile.fluxcd.io/requestedAt"] = token
obj.metadata.annotations["reconcile.fluxcd.io/resetAt"] = token
obj.metadata.annotations["openmed.ai/rollback-to"] = nil
return obj
