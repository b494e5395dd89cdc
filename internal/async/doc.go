// Package async is the background machinery the engines share: a Pool of
// workers for work that must not hold up its caller, and Pending, a
// request's result that its caller may stop waiting for.
//
// Guaranteed:
//   - Pool.Go runs its function on a goroutine the pool owns: an idle
//     worker when one waits for work, else a new one, which then waits for
//     more work for two seconds. Go reports false, and runs nothing, once
//     Stop or Close has begun.
//   - Pool.Close waits for the work within its context, then cancels the
//     context the work was given and waits for it to return: no goroutine
//     of a pool outlives its Close.
//   - Pending hands its result to its waiter, or, when the waiter left
//     first (its context ended, or WaitUntil's deadline passed), back to
//     the one that delivers it (Deliver reports false), whose job it is to
//     undo what a request nobody waits for did. Exactly one of the two gets
//     the result, and the one that gets it owns the Pending from then on:
//     it may Reset it for another request.
//
// Not guaranteed: that work ends when its waiter leaves. Work ends on its
// own, or when the context Close cancels ends; work that ignores that
// context (a go-zookeeper call, which takes none) must end some other way,
// such as its connection closing, before Close can return.
package async
