-- Let the operator reconcile again.
obj.spec.suspend = false
return obj
