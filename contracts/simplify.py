"""A post-pass over OpShin's UPLC that removes calling-convention overhead, keeping every result.

OpShin 0.28 binds every variable name of the module to a NameError thunk at the top of the
program (over a hundred bindings, evaluated on every run), routes intermediate values through
single-use let-bindings, and compiles `and` chains with double negations. On these validators
that was about a third of the memory budget. The rewrites below never change whether a script
succeeds, and never add cost:

- substitute a binding whose value is a variable, a constant, a builtin, `(delay var)` or a
  small closed value (evaluating it costs one step, as the variable lookup did);
- drop a binding of a pure value (lambda, delay, constant) that nothing reads, and substitute
  one read once, even under a lambda (evaluating it costs the step the lookup did);
- substitute a binding read exactly once, outside any lambda or delay, and beta-reduce a
  lambda applied to all its arguments when each is used that way or is trivial: each value
  is still computed exactly once; only which of two failing terms fails first (and so the
  trace) may change, and UPLC has no other effects;
- `(force (delay t))` -> `t`, `not (not c)` -> `c`, and OpShin's `and`/`or`, which bind the
  first operand to return it when it decides, return the constant instead;
- OpShin's list map applied to the identity over a builtin list ending in the empty list
  (how it casts list Data to a typed list of records) -> the list itself: the copy it
  builds is the same list, and mapping the identity cannot fail.

Substitution needs unique binder names, which OpShin's -O3 output has; `simplify` checks it.
"""

from __future__ import annotations

from uplc import ast as U

PURE = (U.Delay, U.Lambda, U.Constant, U.BuiltIn)
SMALL = 60  # AST nodes: closed pure values up to this size are duplicated freely
FUEL = 10_000  # rewrites at one node, and passes: a bound that termination never reaches


def _children(term: U.AST) -> list[U.AST]:
    if isinstance(term, U.Apply):
        return [term.f, term.x]
    if isinstance(term, U.Lambda | U.Delay | U.Force):
        return [term.term]
    return []


def _size(term: U.AST) -> int:
    size, stack = 0, [term]
    while stack:
        node = stack.pop()
        size += 1
        stack += _children(node)
    return size


def _free(term: U.AST) -> dict[str, int]:
    """How often each free variable occurs."""
    counts: dict[str, int] = {}
    stack: list[tuple[U.AST, frozenset[str]]] = [(term, frozenset())]
    while stack:
        node, bound = stack.pop()
        if isinstance(node, U.Variable):
            if node.name not in bound:
                counts[node.name] = counts.get(node.name, 0) + 1
        elif isinstance(node, U.Lambda):
            stack.append((node.term, bound | {node.var_name}))
        else:
            stack += [(child, bound) for child in _children(node)]
    return counts


def _self_applies(term: U.AST) -> bool:
    """Whether `term` contains `[x x]` or `[(force x) x]` (OpShin's recursion through a
    delayed self): a recursion, which duplicating could unroll forever."""
    stack = [term]
    while stack:
        node = stack.pop()
        if isinstance(node, U.Apply) and isinstance(node.x, U.Variable):
            f = node.f.term if isinstance(node.f, U.Force) else node.f
            if isinstance(f, U.Variable) and f.name == node.x.name:
                return True
        stack += _children(node)
    return False


def _trivial(value: U.AST) -> bool:
    """Values that cost one step to evaluate, like the lookup they replace."""
    if isinstance(value, U.Variable | U.Constant | U.BuiltIn):
        return True
    if isinstance(value, U.Delay) and isinstance(value.term, U.Variable):
        return True
    return (
        isinstance(value, PURE)
        and _size(value) <= SMALL
        and not _free(value)
        and not _self_applies(value)
    )


class _Fresh:
    """Renames the binders of a duplicated value, so binder names stay unique."""

    count = 0

    @classmethod
    def copy(cls, term: U.AST) -> U.AST:
        return cls._rename(term, {})

    @classmethod
    def _rename(cls, term: U.AST, names: dict[str, str]) -> U.AST:
        if isinstance(term, U.Variable):
            return U.Variable(names.get(term.name, term.name))
        if isinstance(term, U.Apply):
            return U.Apply(cls._rename(term.f, names), cls._rename(term.x, names))
        if isinstance(term, U.Lambda):
            cls.count += 1
            fresh = f"s{cls.count}"
            return U.Lambda(fresh, cls._rename(term.term, {**names, term.var_name: fresh}))
        if isinstance(term, U.Delay):
            return U.Delay(cls._rename(term.term, names))
        if isinstance(term, U.Force):
            return U.Force(cls._rename(term.term, names))
        return term


def _strict_once(body: U.AST, name: str) -> bool:
    """`name` occurs once in `body`, in a position evaluated whenever `body` is."""
    if _free(body).get(name, 0) != 1:
        return False
    stack = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, U.Variable) and node.name == name:
            return True
        if isinstance(node, U.Apply | U.Force):
            stack += _children(node)
    return False


def _substitute(term: U.AST, name: str, value: U.AST) -> U.AST:
    if isinstance(term, U.Variable):
        return _Fresh.copy(value) if term.name == name else term
    if isinstance(term, U.Apply):
        return U.Apply(_substitute(term.f, name, value), _substitute(term.x, name, value))
    if isinstance(term, U.Lambda):
        if term.var_name == name:
            return term
        return U.Lambda(term.var_name, _substitute(term.term, name, value))
    if isinstance(term, U.Delay):
        return U.Delay(_substitute(term.term, name, value))
    if isinstance(term, U.Force):
        return U.Force(_substitute(term.term, name, value))
    return term


def _negated(term: U.AST) -> U.AST | None:
    """c when term is `[[[(force (builtin ifThenElse)) c] False] True]`, i.e. `not c`."""
    if not (isinstance(term, U.Apply) and isinstance(term.f, U.Apply)):
        return None
    test = term.f.f
    if (
        isinstance(term.x, U.BuiltinBool)
        and term.x.value is True
        and isinstance(term.f.x, U.BuiltinBool)
        and term.f.x.value is False
        and isinstance(test, U.Apply)
        and isinstance(test.f, U.Force)
        and isinstance(test.f.term, U.BuiltIn)
        and test.f.term.builtin == U.BuiltInFun.IfThenElse
    ):
        return test.x
    return None


def _beta(term: U.Apply) -> U.AST | None:
    """Substitute the arguments of an applied lambda that are trivial or used strictly once."""
    arguments = []
    head: U.AST = term
    while isinstance(head, U.Apply):
        arguments.append(head.x)
        head = head.f
    arguments.reverse()
    parameters, body = [], head
    while isinstance(body, U.Lambda) and len(parameters) < len(arguments):
        parameters.append(body.var_name)
        body = body.term
    if not parameters:
        return None
    pairs = list(zip(parameters, arguments, strict=False))
    kept = []
    for name, value in pairs:
        uses = _free(body).get(name, 0)
        if _trivial(value) or _strict_once(body, name):
            body = _substitute(body, name, value)
        elif isinstance(value, PURE) and uses <= 1:
            # a pure binding read at most once, even under a lambda: evaluating the lambda or
            # delay where it is read costs the one step the lookup did
            body = _substitute(body, name, value)
        else:
            kept.append((name, value))
    if len(kept) == len(pairs):
        return None
    for name, _ in reversed(kept):
        body = U.Lambda(name, body)
    for _, value in kept:
        body = U.Apply(body, value)
    for value in arguments[len(pairs) :]:
        body = U.Apply(body, value)
    return body


def _short_circuit(term: U.Apply) -> U.AST | None:
    """`a and b` / `a or b` as OpShin binds them, `(lam t (if t b t)) a`, without the binding."""
    head = term.f
    if not isinstance(head, U.Lambda):
        return None
    name, body = head.var_name, head.term
    if not (isinstance(body, U.Force) and isinstance(body.term, U.Apply)):
        return None
    test, otherwise = body.term.f, body.term.x
    if not (isinstance(test, U.Apply) and isinstance(test.f, U.Apply)):
        return None
    ite, then = test.f.f, test.x
    if not (
        isinstance(ite, U.Force)
        and isinstance(ite.term, U.BuiltIn)
        and ite.term.builtin == U.BuiltInFun.IfThenElse
        and isinstance(test.f.x, U.Variable)
        and test.f.x.name == name
        and isinstance(then, U.Delay)
        and isinstance(otherwise, U.Delay)
    ):
        return None
    is_name = [isinstance(d.term, U.Variable) and d.term.name == name for d in (then, otherwise)]
    if is_name == [False, True] and name not in _free(then):  # a and b
        then, otherwise = then, U.Delay(U.BuiltinBool(False))
    elif is_name == [True, False] and name not in _free(otherwise):  # a or b
        then, otherwise = U.Delay(U.BuiltinBool(True)), otherwise
    else:
        return None
    return U.Force(U.Apply(U.Apply(U.Apply(ite, term.x), then), otherwise))


def _reduce(term: U.AST) -> U.AST | None:
    """One rewrite at the root of `term`, if any applies."""
    inner = _negated(term)
    if inner is not None and (original := _negated(inner)) is not None:
        return original
    if isinstance(term, U.Apply) and (shortened := _short_circuit(term)) is not None:
        return shortened
    if isinstance(term, U.Apply):
        return _beta(term)
    if isinstance(term, U.Force) and isinstance(term.term, U.Delay):
        return term.term.term
    return None


def _pass(term: U.AST) -> U.AST:
    for _ in range(FUEL):
        reduced = _reduce(term)
        if reduced is None:
            break
        term = reduced
    else:
        raise RuntimeError("simplify did not converge")
    if isinstance(term, U.Apply):
        return U.Apply(_pass(term.f), _pass(term.x))
    if isinstance(term, U.Lambda):
        return U.Lambda(term.var_name, _pass(term.term))
    if isinstance(term, U.Delay):
        return U.Delay(_pass(term.term))
    if isinstance(term, U.Force):
        return U.Force(_pass(term.term))
    return term


def _alpha(term: U.AST, names: dict[str, str] | None = None) -> str:
    """`term` with its bound variables numbered in binding order (free ones keep their name)."""
    names = names or {}
    if isinstance(term, U.Variable):
        return names.get(term.name, "free:" + term.name)
    if isinstance(term, U.Apply):
        return f"[{_alpha(term.f, names)} {_alpha(term.x, names)}]"
    if isinstance(term, U.Lambda):
        bound = f"b{len(names)}"
        return f"(lam {bound} {_alpha(term.term, {**names, term.var_name: bound})})"
    if isinstance(term, U.Delay):
        return f"(delay {_alpha(term.term, names)})"
    if isinstance(term, U.Force):
        return f"(force {_alpha(term.term, names)})"
    return term.dumps()


SELF_APPLY = "(lam b0 [b0 b0])"
# OpShin's MapList(xs, f, default) with the self-application bound to free:W
MAP_LIST = (
    "(lam b0 (lam b1 (lam b2 [[free:W (lam b3 (lam b4 (force [[[(force (force (builtin "
    "chooseList))) b4] (delay (force b2))] (delay [[(force (builtin mkCons)) [b1 [(force "
    "(builtin headList)) b4]]] [[b3 b3] [(force (builtin tailList)) b4]]])])))] b0])))"
)
EMPTY = "(delay (con (list data) []))"


def _identity_maps(term: U.AST, env: dict[str, str]) -> U.AST:
    """Replace `[[[map xs] (lam y y)] (delay [])]` by xs, `map` a let-bound MAP_LIST."""
    if isinstance(term, U.Apply):
        f, arguments = term, []
        while isinstance(f, U.Apply):
            arguments.append(f.x)
            f = f.f
        arguments.reverse()
        if (
            isinstance(f, U.Variable)
            and len(arguments) == 3
            and env.get(f.name) == "map"
            and _alpha(arguments[1]) == "(lam b0 b0)"
            and _alpha(arguments[2]) == EMPTY
        ):
            return _identity_maps(arguments[0], env)
        if isinstance(term.f, U.Lambda):
            value = _alpha(term.x)
            inner = {k: v for k, v in env.items() if k != term.f.var_name}
            if value == SELF_APPLY:
                inner[term.f.var_name] = SELF_APPLY
            applier = [k for k, v in env.items() if v == SELF_APPLY]
            for name in applier:
                if value == MAP_LIST.replace("free:W", "free:" + name):
                    inner[term.f.var_name] = "map"
            return U.Apply(
                U.Lambda(term.f.var_name, _identity_maps(term.f.term, inner)),
                _identity_maps(term.x, env),
            )
        return U.Apply(_identity_maps(term.f, env), _identity_maps(term.x, env))
    if isinstance(term, U.Lambda):
        inner = {k: v for k, v in env.items() if k != term.var_name}
        return U.Lambda(term.var_name, _identity_maps(term.term, inner))
    if isinstance(term, U.Delay):
        return U.Delay(_identity_maps(term.term, env))
    if isinstance(term, U.Force):
        return U.Force(_identity_maps(term.term, env))
    return term


def simplify(program: U.Program) -> U.Program:
    """The program with the rewrites above applied until nothing changes."""
    binders = []
    stack = [program.term]
    while stack:
        node = stack.pop()
        if isinstance(node, U.Lambda):
            binders.append(node.var_name)
        stack += _children(node)
    if len(binders) != len(set(binders)):
        raise ValueError("simplify needs unique binder names (compile with -O3)")
    term = program.term
    for _ in range(FUEL):
        previous, term = term, _identity_maps(_pass(term), {})
        if term.dumps() == previous.dumps():  # uplc's constants refuse == across types
            return U.Program(program.version, term)
    raise RuntimeError("simplify did not converge")
