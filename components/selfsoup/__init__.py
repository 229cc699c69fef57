"""selfsoup — Self-Soupervision: model soups whose ingredients are cooked by self-supervised learning."""
