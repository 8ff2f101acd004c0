"""The tool definitions the tool-call tests share (OpenAI's `tools` entries)."""
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                            "parameters": {"type": "object",
                                                           "properties": {"city": {"type": "string"},
                                                                          "unit": {"enum": ["C", "F"]}},
                                                           "required": ["city", "unit"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Local time in a city",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                        "required": ["city"]}}}
