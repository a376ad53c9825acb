package argocd

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/argoproj/argo-cd/gitops-engine/v3/pkg/health"
	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// luaTimeout is Argo CD's fixed budget for one script execution.
const luaTimeout = time.Second

// luaVM runs scripts the way Argo CD's util/lua does: a new LState per call,
// a 1 s context deadline, the object as the global obj, the last value on
// the stack as the result.
//
// Libraries: with openLibs false (argocd-cm scripts by default, and every
// resource action) only package, base and table are opened and os is
// reachable only as require("os"), limited to time and date: there is no
// global os (see exec). With openLibs true (built-in
// health scripts) gopher-lua opens everything and require("os") returns the
// full os library.
type luaVM struct {
	openLibs bool
	// now is the clock behind os.time and os.date in the closed environment,
	// fixed in tests so action output is reproducible.
	now func() time.Time
}

// compile parses and compiles a script once, as Argo CD's script cache does.
func compile(script string) (*lua.FunctionProto, error) {
	chunk, err := parse.Parse(strings.NewReader(script), "<string>")
	if err != nil {
		return nil, err
	}
	return lua.Compile(chunk, "<string>")
}

// run executes a script source (recompiled on each call, as Argo CD up to 3.5
// does) and returns its result converted to Go values.
func (vm luaVM) run(obj map[string]any, script string) (any, error) {
	return vm.exec(obj, func(l *lua.LState) error { return l.DoString(script) })
}

// runProto executes a precompiled script in a fresh state.
func (vm luaVM) runProto(obj map[string]any, proto *lua.FunctionProto) (any, error) {
	return vm.exec(obj, func(l *lua.LState) error {
		l.Push(l.NewFunctionFromProto(proto))
		return l.PCall(0, lua.MultRet, nil)
	})
}

func (vm luaVM) exec(obj map[string]any, call func(*lua.LState) error) (any, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: !vm.openLibs})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return nil, fmt.Errorf("opening %q: %w", lib.name, err)
		}
	}
	// Argo CD's safe-os opener, reproduced as it is: it registers time and
	// date under the already loaded "table" module, which leaves it as it was.
	l.RegisterModule(lua.TabLibName, vm.safeOSFuncs())
	l.PreloadModule(lua.OsLibName, vm.safeOS)

	ctx, cancel := context.WithTimeout(context.Background(), luaTimeout)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", toLua(l, obj))
	if err := call(l); err != nil {
		return nil, err
	}
	return fromLua(l.Get(-1)), nil
}

// safeOS is the closed environment's os module: time and date only.
func (vm luaVM) safeOS(l *lua.LState) int {
	l.Push(l.SetFuncs(l.NewTable(), vm.safeOSFuncs()))
	return 1
}

func (vm luaVM) safeOSFuncs() map[string]lua.LGFunction {
	now := time.Now
	if vm.now != nil {
		now = vm.now
	}
	return map[string]lua.LGFunction{
		"time": func(l *lua.LState) int {
			l.Push(lua.LNumber(now().Unix()))
			return 1
		},
		"date": func(l *lua.LState) int {
			l.Push(lua.LString(strftime(now(), l.OptString(1, "%c"))))
			return 1
		},
	}
}

// strftime formats the C conversions scripts use for timestamps; a leading
// "!" selects UTC.
func strftime(t time.Time, format string) string {
	if rest, ok := strings.CutPrefix(format, "!"); ok {
		t, format = t.UTC(), rest
	}
	layouts := map[byte]string{'Y': "2006", 'm': "01", 'd': "02", 'H': "15", 'M': "04", 'S': "05", 'X': "15:04:05", 'c': time.ANSIC}
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			b.WriteByte(format[i])
			continue
		}
		i++
		if layout, ok := layouts[format[i]]; ok {
			b.WriteString(t.Format(layout))
		} else {
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}

// toLua converts a decoded object to Lua values as Argo CD does: every number
// type becomes a Lua number, json.Number a string, lists 1-based tables.
func toLua(l *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case bool:
		return lua.LBool(v)
	case string:
		return lua.LString(v)
	case json.Number:
		return lua.LString(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case int32:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case []any:
		t := l.CreateTable(len(v), 0)
		for _, item := range v {
			t.Append(toLua(l, item))
		}
		return t
	case map[string]any:
		t := l.CreateTable(0, len(v))
		for k, item := range v {
			t.RawSetString(k, toLua(l, item))
		}
		return t
	default:
		return lua.LNil
	}
}

// fromLua converts a script result to Go values the way a JSON encoding of
// it decodes: a table whose keys are exactly 1..n is a list, any other table
// a map. An empty table becomes an empty map (Argo CD encodes it as a list
// and then restores maps where the live object had one).
func fromLua(v lua.LValue) any {
	switch v := v.(type) {
	case lua.LBool:
		return bool(v)
	case lua.LString:
		return string(v)
	case lua.LNumber:
		return float64(v)
	case *lua.LTable:
		if n := v.MaxN(); n > 0 && n == v.Len() && tableSize(v) == n {
			list := make([]any, 0, n)
			for i := 1; i <= n; i++ {
				list = append(list, fromLua(v.RawGetInt(i)))
			}
			return list
		}
		m := map[string]any{}
		v.ForEach(func(k, item lua.LValue) {
			key := k.String()
			if n, ok := k.(lua.LNumber); ok {
				key = strconv.FormatFloat(float64(n), 'f', -1, 64)
			}
			m[key] = fromLua(item)
		})
		return m
	default:
		return nil
	}
}

func tableSize(t *lua.LTable) int {
	n := 0
	t.ForEach(func(lua.LValue, lua.LValue) { n++ })
	return n
}

// validHealthCodes are the codes Argo CD accepts from a script.
var validHealthCodes = map[health.HealthStatusCode]bool{
	health.HealthStatusHealthy: true, health.HealthStatusProgressing: true, health.HealthStatusDegraded: true,
	health.HealthStatusSuspended: true, health.HealthStatusMissing: true, health.HealthStatusUnknown: true,
}

// toHealthStatus converts a health script result as Argo CD does: it must be
// a table; it is encoded to JSON and decoded into a HealthStatus; an invalid
// code becomes Unknown.
func toHealthStatus(result any) (*health.HealthStatus, error) {
	if _, ok := result.(map[string]any); !ok {
		return nil, fmt.Errorf("expect table output from Lua script, not %T", result)
	}
	data, err := json.Marshal(result)
	if err != nil {
		return nil, err
	}
	hs := &health.HealthStatus{}
	if err := json.Unmarshal(data, hs); err != nil {
		return nil, err
	}
	if !validHealthCodes[hs.Status] {
		return &health.HealthStatus{Status: health.HealthStatusUnknown, Message: "Lua returned an invalid health status"}, nil
	}
	return hs, nil
}

// LuaHealth runs health.lua on obj the way Argo CD runs a health script
// from argocd-cm: a fresh Lua state with the closed libraries, the object as
// the global obj, Argo CD's one-second budget. It shows what Argo CD will
// say of an object without an Argo CD (the end-to-end tests sample live
// models with it).
func LuaHealth(obj *unstructured.Unstructured) (*health.HealthStatus, error) {
	result, err := luaVM{}.run(obj.Object, HealthScript())
	if err != nil {
		return nil, err
	}
	return toHealthStatus(result)
}
