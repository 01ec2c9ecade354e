// The AI SDK's ToolLoopAgent example (docs/03-agents/01-overview.mdx), through @ai-sdk/openai-compatible
// (its README's usage) at a local server: MODEL and BASE from the environment.
import { ToolLoopAgent, tool } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { z } from 'zod';
import { report } from './report.mjs';

const provider = createOpenAICompatible({ baseURL: process.env.BASE + '/v1', name: 'strata' });

const weatherAgent = new ToolLoopAgent({
  model: provider.chatModel(process.env.MODEL),
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
});

const result = await weatherAgent.generate({
  prompt: 'What is the weather in San Francisco in celsius?',
});

console.log(result.text); // agent's final answer
report(result.text, result.steps);
