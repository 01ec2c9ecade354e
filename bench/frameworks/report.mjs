// What every example prints last: one JSON line with the final text and each step's text, calls, results and
// finish reason (bench/frameworks_e2e.py reads it).
export function report(text, steps) {
  console.log(JSON.stringify({
    text,
    steps: steps.map((s) => ({
      text: s.text,
      calls: s.toolCalls.map((c) => [c.toolName, c.input]),
      results: s.toolResults.map((r) => r.output),
      finish: s.finishReason,
    })),
  }));
}
