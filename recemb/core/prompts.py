"""Query instructions in the E5-mistral format; documents never get one.

Task instructions are microsoft/unilm ``e5/utils.py`` (the e5-mistral set, cited in
reference/checkpoints-and-context-extension.md §5), keyed by MTEB task name.
"""

from __future__ import annotations

__all__ = ["DEFAULT_INSTRUCTION", "QUERY_TEMPLATE", "TASK_INSTRUCTIONS", "query_prompt", "resolve_instruction"]

QUERY_TEMPLATE = "Instruct: {instruction}\nQuery: "

DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"

TASK_INSTRUCTIONS: dict[str, str] = {
    "STS": "Retrieve semantically similar text.",
    "Summarization": "Given a news summary, retrieve other semantically similar summaries",
    "BitextMining": "Retrieve parallel sentences.",
    "ArguAna": "Given a claim, find documents that refute the claim",
    "ClimateFEVER": "Given a claim about climate change, retrieve documents that support or refute the claim",
    "DBPedia": "Given a query, retrieve relevant entity descriptions from DBPedia",
    "FEVER": "Given a claim, retrieve documents that support or refute the claim",
    "FiQA2018": "Given a financial question, retrieve user replies that best answer the question",
    "HotpotQA": "Given a multi-hop question, retrieve documents that can help answer the question",
    "MSMARCO": DEFAULT_INSTRUCTION,
    "NFCorpus": "Given a question, retrieve relevant documents that best answer the question",
    "NQ": "Given a question, retrieve Wikipedia passages that answer the question",
    "MIRACL": "Given a question, retrieve Wikipedia passages that answer the question",
    "QuoraRetrieval": "Given a question, retrieve questions that are semantically equivalent to the given question",
    "SCIDOCS": "Given a scientific paper title, retrieve paper abstracts that are cited by the given paper",
    "SciFact": "Given a scientific claim, retrieve documents that support or refute the claim",
    "Touche2020": "Given a question, retrieve detailed and persuasive arguments that answer the question",
    "TRECCOVID": "Given a query on COVID-19, retrieve documents that answer the query",
    "CQADupstack": "Given a question, retrieve detailed question descriptions from Stackexchange that are duplicates "
    "to the given question",
    "AmazonCounterfactualClassification": "Classify a given Amazon customer review text as either counterfactual or "
    "not-counterfactual",
    "AmazonPolarityClassification": "Classify Amazon reviews into positive or negative sentiment",
    "AmazonReviewsClassification": "Classify the given Amazon review into its appropriate rating category",
    "Banking77Classification": "Given a online banking query, find the corresponding intents",
    "EmotionClassification": "Classify the emotion expressed in the given Twitter message into one of the six "
    "emotions: anger, fear, joy, love, sadness, and surprise",
    "ImdbClassification": "Classify the sentiment expressed in the given movie review text from the IMDB dataset",
    "MassiveIntentClassification": "Given a user utterance as query, find the user intents",
    "MassiveScenarioClassification": "Given a user utterance as query, find the user scenarios",
    "MTOPDomainClassification": "Classify the intent domain of the given utterance in task-oriented conversation",
    "MTOPIntentClassification": "Classify the intent of the given utterance in task-oriented conversation",
    "ToxicConversationsClassification": "Classify the given comments as either toxic or not toxic",
    "TweetSentimentExtractionClassification": "Classify the sentiment of a given tweet as either positive, negative, "
    "or neutral",
    "ArxivClusteringP2P": "Identify the main and secondary category of Arxiv papers based on the titles and abstracts",
    "ArxivClusteringS2S": "Identify the main and secondary category of Arxiv papers based on the titles",
    "BiorxivClusteringP2P": "Identify the main category of Biorxiv papers based on the titles and abstracts",
    "BiorxivClusteringS2S": "Identify the main category of Biorxiv papers based on the titles",
    "MedrxivClusteringP2P": "Identify the main category of Medrxiv papers based on the titles and abstracts",
    "MedrxivClusteringS2S": "Identify the main category of Medrxiv papers based on the titles",
    "RedditClustering": "Identify the topic or theme of Reddit posts based on the titles",
    "RedditClusteringP2P": "Identify the topic or theme of Reddit posts based on the titles and posts",
    "StackExchangeClustering": "Identify the topic or theme of StackExchange posts based on the titles",
    "StackExchangeClusteringP2P": "Identify the topic or theme of StackExchange posts based on the given paragraphs",
    "TwentyNewsgroupsClustering": "Identify the topic or theme of the given news articles",
    "AskUbuntuDupQuestions": "Retrieve duplicate questions from AskUbuntu forum",
    "StackOverflowDupQuestions": "Retrieve duplicate questions from StackOverflow forum",
    "SprintDuplicateQuestions": "Retrieve duplicate questions from Sprint forum",
    "MindSmallReranking": "Retrieve relevant news articles based on user browsing history",
    "SciDocsRR": "Given a title of a scientific paper, retrieve the titles of other relevant papers",
    "TwitterSemEval2015": "Retrieve tweets that are semantically similar to the given tweet",
    "TwitterURLCorpus": "Retrieve tweets that are semantically similar to the given tweet",
}


def resolve_instruction(instruction_or_task: str | None = None) -> str:
    """A task name from ``TASK_INSTRUCTIONS`` (CQADupstack* by prefix) gives its instruction; any other string is
    used as the instruction itself; None gives the default web-search instruction."""
    if instruction_or_task is None:
        return DEFAULT_INSTRUCTION
    if not isinstance(instruction_or_task, str):
        raise TypeError(f"instruction must be a str or None, got {type(instruction_or_task).__name__}")
    if instruction_or_task in TASK_INSTRUCTIONS:
        return TASK_INSTRUCTIONS[instruction_or_task]
    if instruction_or_task.startswith("CQADupstack"):
        return TASK_INSTRUCTIONS["CQADupstack"]
    return instruction_or_task


def query_prompt(instruction_or_task: str | None = None) -> str:
    """``"Instruct: {instruction}\\nQuery: "``, to be prepended to each query."""
    return QUERY_TEMPLATE.format(instruction=resolve_instruction(instruction_or_task))
