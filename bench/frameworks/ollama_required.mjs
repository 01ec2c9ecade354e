// The same agent through ollama-ai-provider-v2 (its README's custom instance), forcing a tool on the first step
// with prepareStep (docs/03-agents/04-loop-control.mdx).
import { ToolLoopAgent, tool } from 'ai';
import { createOllama } from 'ollama-ai-provider-v2';
import { z } from 'zod';
import { report } from './report.mjs';

const ollama = createOllama({ baseURL: process.env.BASE + '/api' });

const weatherAgent = new ToolLoopAgent({
  model: ollama(process.env.MODEL),
  tools: {
    weather: tool({
      description: 'Get the weather in a location (in Fahrenheit)',
      inputSchema: z.object({
        location: z.string().describe('The location to get the weather for'),
      }),
      execute: async ({ location }) => ({
        location,
        temperature: 72 + Math.floor(Math.random() * 21) - 10,
      }),
    }),
    convertFahrenheitToCelsius: tool({
      description: 'Convert temperature from Fahrenheit to Celsius',
      inputSchema: z.object({
        temperature: z.number().describe('Temperature in Fahrenheit'),
      }),
      execute: async ({ temperature }) => {
        const celsius = Math.round((temperature - 32) * (5 / 9));
        return { celsius };
      },
    }),
  },
  prepareStep: async ({ stepNumber }) => {
    if (stepNumber === 0) {
      return { toolChoice: 'required' };
    }
    return {};
  },
});

const result = await weatherAgent.generate({
  prompt: 'What is the weather in San Francisco in celsius?',
});

console.log(result.text);
report(result.text, result.steps);
