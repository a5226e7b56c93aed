package tg_test

import (
	"fmt"
	"go/ast"
	"go/types"
	"sort"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"

	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/tg/tgtype"
)

const module = "github.com/taskgraph/taskgraph"

// forbidden reports whether a package may not appear in the library's
// public signatures: the ORM, the store and everything internal.
func forbidden(path string) bool {
	return path == module+"/ent" || strings.HasPrefix(path, module+"/ent/") ||
		strings.HasPrefix(path, module+"/internal/") ||
		path == module+"/graph" || strings.HasPrefix(path, module+"/graph/") ||
		path == module+"/worker"
}

// TestPublicSignaturesNameNoInternalType fails when an exported name of
// the library (tg) or of its value types (tg/tgtype) — a function's or a
// method's parameters and results, a type's exported fields, a variable's
// or a constant's type, the underlying type of a type that is not a
// struct — names a type of ent, the store, or anything under internal/.
// It also holds every exported name to having a doc comment.
func TestPublicSignaturesNameNoInternalType(t *testing.T) {
	t.Parallel()
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedTypes | packages.NeedSyntax | packages.NeedTypesInfo}
	pkgs, err := packages.Load(cfg, module+"/tg", module+"/tg/tgtype")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 2 {
		t.Fatalf("loaded %d packages", len(pkgs))
	}
	var bad []string
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			t.Fatalf("%s: %v", p.PkgPath, p.Errors)
		}
		scope := p.Types.Scope()
		for _, name := range scope.Names() {
			obj := scope.Lookup(name)
			if !obj.Exported() {
				continue
			}
			where := p.PkgPath + "." + name
			for _, leak := range leaks(obj) {
				bad = append(bad, where+": "+leak)
			}
		}
		bad = append(bad, undocumented(p)...)
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Fatalf("the public API names internal types or lacks doc comments:\n  %s", strings.Join(bad, "\n  "))
	}
}

// leaks lists the forbidden types obj's public face names.
func leaks(obj types.Object) []string {
	var out []string
	check := func(what string, typ types.Type) {
		for _, n := range named(typ, map[types.Type]bool{}) {
			if n.Obj().Pkg() != nil && forbidden(n.Obj().Pkg().Path()) {
				out = append(out, fmt.Sprintf("%s names %s", what, types.TypeString(n, nil)))
			}
		}
	}
	switch o := obj.(type) {
	case *types.Func:
		check("its signature", o.Type())
	case *types.Var, *types.Const:
		check("its type", o.Type())
	case *types.TypeName:
		typ := o.Type()
		if st, ok := typ.Underlying().(*types.Struct); ok {
			for i := range st.NumFields() {
				if f := st.Field(i); f.Exported() {
					check("field "+f.Name(), f.Type())
				}
			}
		} else {
			check("its underlying type", typ.Underlying())
		}
		for _, recv := range []types.Type{typ, types.NewPointer(typ)} {
			ms := types.NewMethodSet(recv)
			for i := range ms.Len() {
				if m := ms.At(i).Obj(); m.Exported() {
					check("method "+m.Name(), m.Type())
				}
			}
		}
	}
	return out
}

// named returns the named types typ is made of.
func named(typ types.Type, seen map[types.Type]bool) []*types.Named {
	if seen[typ] {
		return nil
	}
	seen[typ] = true
	switch t := typ.(type) {
	case *types.Named:
		out := []*types.Named{t}
		for i := range t.TypeArgs().Len() {
			out = append(out, named(t.TypeArgs().At(i), seen)...)
		}
		return out
	case *types.Pointer:
		return named(t.Elem(), seen)
	case *types.Slice:
		return named(t.Elem(), seen)
	case *types.Array:
		return named(t.Elem(), seen)
	case *types.Map:
		return append(named(t.Key(), seen), named(t.Elem(), seen)...)
	case *types.Chan:
		return named(t.Elem(), seen)
	case *types.Signature:
		var out []*types.Named
		for _, tup := range []*types.Tuple{t.Params(), t.Results()} {
			for i := range tup.Len() {
				out = append(out, named(tup.At(i).Type(), seen)...)
			}
		}
		if tp := t.TypeParams(); tp != nil {
			for i := range tp.Len() {
				out = append(out, named(tp.At(i).Constraint(), seen)...)
			}
		}
		return out
	case *types.Struct:
		var out []*types.Named
		for i := range t.NumFields() {
			if t.Field(i).Exported() {
				out = append(out, named(t.Field(i).Type(), seen)...)
			}
		}
		return out
	case *types.Interface:
		var out []*types.Named
		for i := range t.NumMethods() {
			out = append(out, named(t.Method(i).Type(), seen)...)
		}
		return out
	}
	return nil
}

// TestTheSignatureCheckFindsALeak: the check above is not vacuous — a
// public option type over an internal request type is found.
func TestTheSignatureCheckFindsALeak(t *testing.T) {
	t.Parallel()
	engine := types.NewPackage(module+"/internal/engine", "engine")
	req := types.NewNamed(types.NewTypeName(0, engine, "CreateRequest", nil), types.NewStruct(nil, nil), nil)
	tg := types.NewPackage(module+"/tg", "tg")
	sig := types.NewSignatureType(nil, nil, nil, types.NewTuple(types.NewVar(0, tg, "r", types.NewPointer(req))), nil, false)
	opt := types.NewTypeName(0, tg, "TaskOption", nil)
	types.NewNamed(opt, sig, nil)
	if got := leaks(opt); len(got) != 1 || !strings.Contains(got[0], "engine.CreateRequest") {
		t.Fatalf("leaks of func(*engine.CreateRequest): %v", got)
	}
	safe := types.NewTypeName(0, tg, "Safe", nil)
	types.NewNamed(safe, types.NewStruct([]*types.Var{types.NewField(0, tg, "apply", sig, false)}, nil), nil)
	if got := leaks(safe); len(got) != 0 {
		t.Fatalf("an unexported field is no leak: %v", got)
	}
}

// undocumented lists the exported declarations of p without a doc
// comment: functions, methods, types, and each name of a const or var
// block (a block's comment covers its names).
func undocumented(p *packages.Package) []string {
	var out []string
	for _, f := range p.Syntax {
		if strings.HasSuffix(p.Fset.Position(f.Pos()).Filename, "_test.go") {
			continue
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Name.IsExported() && d.Doc == nil && (d.Recv == nil || exportedRecv(d.Recv)) {
					out = append(out, p.PkgPath+"."+d.Name.Name+": no doc comment")
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() && d.Doc == nil && s.Doc == nil {
							out = append(out, p.PkgPath+"."+s.Name.Name+": no doc comment")
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() && d.Doc == nil && s.Doc == nil && s.Comment == nil {
								out = append(out, p.PkgPath+"."+n.Name+": no doc comment")
							}
						}
					}
				}
			}
		}
	}
	return out
}

func exportedRecv(recv *ast.FieldList) bool {
	typ := recv.List[0].Type
	for {
		switch t := typ.(type) {
		case *ast.StarExpr:
			typ = t.X
		case *ast.IndexExpr:
			typ = t.X
		case *ast.IndexListExpr:
			typ = t.X
		case *ast.Ident:
			return t.IsExported()
		default:
			return true
		}
	}
}

// TestValueTypesMatchTheLifecycle: the states and error kinds of package
// tgtype are the lifecycle's own, one for one, so that a value converted
// from the store's is always one of the constants.
func TestValueTypesMatchTheLifecycle(t *testing.T) {
	t.Parallel()
	statuses := map[tgtype.Status]bool{tgtype.Pending: true, tgtype.Executing: true, tgtype.Success: true,
		tgtype.Failed: true, tgtype.RetryPending: true, tgtype.Cancelled: true, tgtype.WaitingDependency: true, tgtype.ReviewPending: true}
	if len(statuses) != len(lifecycle.AllStatuses) {
		t.Fatalf("tgtype has %d states, the lifecycle %d", len(statuses), len(lifecycle.AllStatuses))
	}
	for _, s := range lifecycle.AllStatuses {
		if !statuses[tgtype.Status(s)] {
			t.Errorf("the lifecycle's %s is no tgtype.Status", s)
		}
		if tgtype.Status(s).Final() != s.Terminal() {
			t.Errorf("%s: Final %v, the lifecycle's Terminal %v", s, tgtype.Status(s).Final(), s.Terminal())
		}
	}
	kinds := map[tgtype.ErrorKind]bool{tgtype.Retryable: true, tgtype.NonRetryable: true, tgtype.Resource: true,
		tgtype.Timeout: true, tgtype.KindCancelled: true, tgtype.Interrupted: true, tgtype.Stalled: true}
	if len(kinds) != len(lifecycle.AllErrorKinds) {
		t.Fatalf("tgtype has %d error kinds, the lifecycle %d", len(kinds), len(lifecycle.AllErrorKinds))
	}
	for _, k := range lifecycle.AllErrorKinds {
		if !kinds[tgtype.ErrorKind(k)] {
			t.Errorf("the lifecycle's %s is no tgtype.ErrorKind", k)
		}
	}
}
