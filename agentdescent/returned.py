"""What a callable of the user's returned, checked before it is read as text: `run`'s answer (a
`tree_runner` agent's too), a proposal, a model's reply (`reflector`, `tree_reflector`,
`llm_judge`, `llm_fusion`), and a reward that never ran.

    as_text(None, "run", " for task «t1»")   raises UserError: run returned None for task «t1»; ...

The mistakes named are those Python lets through: an async or generator function, or an object
with an async `__call__`, given where a plain function is called (what it returns is a coroutine
or a generator that never runs; it is closed here, so no "never awaited" warning follows); None
(a `return` left out); bytes; a client's reply object whose str() is '<Reply object at 0x...>'.
Each is a `UserError` naming who returned what, and the fix. Where the callable itself shows it
(`plain_callable`: an async or generator function, or a partial of one), it is refused where it is
given, before a run begins. Left out: whether the text is any good.
"""

from __future__ import annotations

import inspect

from agentdescent.errors import UserError

ASYNC_GIVEN = ("an async or generator function (or a callable object with one) was given; give a plain function "
               "(for an async one, a function that returns asyncio.run(...) of it)")


def plain_callable(fn: object, name: str) -> None:
    """`UserError` unless `fn` is a callable that answers when called: an async or generator
    function (or an object whose `__call__` is one) is refused where it is given, before a run
    spends a call. plain_callable(print, "run") is None"""
    if not callable(fn):
        raise UserError(f"{name} must be a callable; got {type(fn).__name__}")
    calls = (fn, getattr(type(fn), "__call__", None))
    if any(inspect.iscoroutinefunction(c) or inspect.isasyncgenfunction(c) or inspect.isgeneratorfunction(c) for c in calls):
        kind = "a generator function" if any(inspect.isgeneratorfunction(c) for c in calls) else "an async function"
        raise UserError(f"{name} is {kind}; it is called from worker threads, which need the answer itself: give a plain "
                        "function (for an async one, a function that returns asyncio.run(...) of it)")


def unfinished(value: object) -> str | None:
    """The type's name of `value` when it is a coroutine, another awaitable or a generator, the
    value of a call that has not run, else None; a coroutine or a generator is closed, never to
    run. unfinished("text") is None"""
    if not (inspect.isawaitable(value) or inspect.isgenerator(value) or inspect.isasyncgen(value)):
        return None
    if inspect.iscoroutine(value) or inspect.isgenerator(value):
        value.close()
    return type(value).__name__


def problem(value: object, who: str, where: str = "", *, what: str = "its answer", strict: bool = False) -> str | None:
    """Why `value`, which `who` returned (`where` follows: " for task «t1»", say), cannot be read as
    `what`; None when it can. A value with text of its own (a number) stands for its str(), unless
    `strict` (a model's reply, a proposal), where only a str does."""
    if isinstance(value, str):
        return None
    kind = unfinished(value)
    if kind is not None:
        return f"{who} returned {kind}{where}, not {what}: {ASYNC_GIVEN}"
    if value is None:
        return f"{who} returned None{where}; it must return {what} as text (a return missing?)"
    if isinstance(value, (bytes, bytearray)):
        return f"{who} returned bytes{where}; it must return {what} as text (decode it with .decode())"
    if type(value).__str__ is object.__str__ and type(value).__repr__ is object.__repr__:
        return (f"{who} returned a {type(value).__name__} object{where}, which has no text of its own (its str() is "
                f"'<... object at 0x...>'); it must return {what} as text (a client's reply object: its .text or "
                ".content, say)")
    if strict:
        raw = " (a client's raw response: the text inside it)" if isinstance(value, (dict, list)) else ""
        return f"{who} returned {type(value).__name__}{where}; it must return {what} as a str{raw}"
    return None


def as_text(value: object, who: str, where: str = "", *, what: str = "its answer", strict: bool = False) -> str:
    """`value` as the text `who` returned, or a `UserError` saying why it is none (see `problem`)."""
    why = problem(value, who, where, what=what, strict=strict)
    if why is not None:
        raise UserError(why)
    if isinstance(value, str):
        return value
    try:
        return str(value)
    except Exception as exc:  # noqa: BLE001 -- the object's own __str__
        from agentdescent.quoting import described  # here, not at the top: refcheck imports this module, and little else

        raise UserError(f"{who} returned {type(value).__name__}{where}, and its str() raised {described(exc)}; it "
                        f"must return {what} as text") from None
