"""_serve"""
