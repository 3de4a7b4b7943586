"""_terms"""
