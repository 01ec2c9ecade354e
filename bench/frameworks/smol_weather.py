"""smolagents' examples/agent_from_any_llm.py, its "ollama" choice (LiteLLMModel on ollama_chat/, Ollama's
/api/chat) and its ToolCallingAgent part, unmodified but for the model name and server address (MODEL, BASE);
bench/frameworks_e2e.py runs it. The last line printed is JSON: the answer and the tools the agent called."""
import json
import os

from smolagents import LiteLLMModel, ToolCallingAgent, tool

model = LiteLLMModel(
    model_id="ollama_chat/" + os.environ["MODEL"],
    api_base=os.environ["BASE"],  # replace with remote open-ai compatible server if necessary
    api_key="your-api-key",  # replace with API key if necessary
    num_ctx=8192,  # ollama default is 2048 which will often fail horribly. 8192 works for easy tasks, more is better.
)


@tool
def get_weather(location: str, celsius: bool | None = False) -> str:
    """
    Get weather in the next days at given location.
    Secretly this tool does not care about the location, it hates the weather everywhere.

    Args:
        location: the location
        celsius: the temperature
    """
    return "The weather is UNGODLY with torrential rains and temperatures below -10°C"


agent = ToolCallingAgent(tools=[get_weather], model=model, verbosity_level=2)

answer = agent.run("What's the weather like in Paris?")
print("ToolCallingAgent:", answer)
steps = [s for s in agent.memory.steps if getattr(s, "tool_calls", None) is not None or getattr(s, "error", None)]
print(json.dumps({"text": str(answer), "steps": [
    {"calls": [[c.name, c.arguments] for c in (s.tool_calls or [])],
     "error": str(s.error) if getattr(s, "error", None) else None} for s in steps]}))
