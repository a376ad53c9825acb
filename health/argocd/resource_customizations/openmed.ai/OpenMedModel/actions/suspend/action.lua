-- Stop the operator from changing anything until resumed.
obj.spec.suspend = true
return obj
