// ollama-ai-provider-v2's README "Tool Calling Support" example, at a custom instance.
import { generateText, tool, stepCountIs } from 'ai';
import { createOllama } from 'ollama-ai-provider-v2';
import { z } from 'zod';
import { report } from './report.mjs';

const ollama = createOllama({ baseURL: process.env.BASE + '/api' });

const { text, toolCalls, toolResults, steps } = await generateText({
  model: ollama(process.env.MODEL),
  stopWhen: stepCountIs(5), // allow tool call + follow-up answer
  prompt: 'What is the weather like in San Francisco?',
  tools: {
    getWeather: tool({
      description: 'Get current weather for a location',
      inputSchema: z.object({
        location: z.string().describe('City name'),
        unit: z.enum(['celsius', 'fahrenheit']).optional(),
      }),
      execute: async ({ location, unit = 'celsius' }) => {
        return { temp: 18, unit, condition: 'sunny' };
      },
    }),
  },
});
console.log(text);
report(text, steps);
